"""kaiwo-ctrl: the Kaiwo operator."""

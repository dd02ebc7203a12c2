"""The Model-Pod contract: how a Model's server Pods are labelled and annotated.

The controller writes it (:mod:`.pods`, :mod:`.adapters`, the cache and files
objects, :mod:`.external`, :mod:`.inferencepool`) and the proxy reads it
(:mod:`.proxy.endpoints`); both import it from here. The shape is KubeAI
0.22's, so existing Pod selectors keep working.
"""

from __future__ import annotations

LABEL_APP = "app"
APP_MODEL = "model"  # the value of LABEL_APP on every server Pod
LABEL_MODEL = "model"  # the Model's name
LABEL_POD_HASH = "pod-hash"
ANNOTATION_PORT = "model-pod-port"  # the server port the proxy connects to
ADAPTER_LABEL_PREFIX = "adapter.kubeai.org/"  # one label per adapter the Pod has loaded (presence counts)
POD_SELECTOR = f"{LABEL_APP}={APP_MODEL}"  # the server Pods of every Model

from kaiwo_ctrl.kaiwo_cli.main import entrypoint

entrypoint()

from kaiwo_ctrl.kaiwo_cli.main import entrypoint

if __name__ == "__main__":
    entrypoint()

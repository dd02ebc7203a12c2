"""The ``Model`` (kubeai.org/v1) controller. One reconcile per Model:
:mod:`.controller` computes the desired state, applies it and writes status once.

* :mod:`.controller` - the reconciler and its wiring;
* :mod:`.config` - the KubeAI system config (``--model-config``);
* :mod:`.pods` - the desired server Pod (pure); :mod:`.engines` - what differs per
  engine; :mod:`.profiles` - resource and cache profiles; :mod:`.urls` - model URLs;
  :mod:`.jsonpatch` - ``modelServerPods.jsonPatches``;
* :mod:`.rollout` - which Pods to create and delete; :mod:`.status` - replica counts
  and conditions; :mod:`.modelfields` - feature labels and replica bounds;
* :mod:`.admission` - server Pods admitted through Kueue;
* :mod:`.cache` - cache profiles (the shared PVC, loader and evict Jobs);
  :mod:`.files` - ``spec.files`` as a ConfigMap;
* :mod:`.adapters` - LoRA adapters loaded live; :mod:`.adapterloader` - the sidecar;
* :mod:`.external` - ``proxy.mode`` internal or external;
* :mod:`.render` - ``kaiwo-ctrl render``: the objects without a cluster.
"""

"""AIMNamespaceConfig: one place per namespace for model credentials, image
pull secrets and gateway exposure.

* :mod:`.effective` (pure): which config applies in a namespace, and which lose.
* :mod:`.credentials` (pure): the env vars, volumes and mounts a source needs,
  and the de-duplicated image pull secrets. Callers (the Model controller, cache
  loader Jobs, adapter sidecars, Kaiwo download Jobs) pass the effective config.
* :mod:`.routes` (pure): the HTTPRoute per Model, the ReferenceGrant per tenant
  namespace, and the route acceptance summary.
* :mod:`.controller`: keeps routes, grants and the config's status up to date.

The operator never reads Secret values: everything here is a reference that the
kubelet resolves (``secretKeyRef`` env, secret volumes).
"""

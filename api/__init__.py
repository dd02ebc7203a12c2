"""Typed models of every CRD this project serves, and the CRD generator.

* ``api.kaiwo.v1alpha1`` - KaiwoJob, KaiwoService, KaiwoQueueConfig (kaiwo.silogen.ai)
* ``api.kaiwo.download`` - download task types shared with ``kaiwo-ctrl download``
* ``api.config.v1alpha1`` - KaiwoConfig, AIMNamespaceConfig (config.kaiwo.silogen.ai)
* ``api.kubeai.v1`` - Model (kubeai.org)
* ``api.meta`` - ObjectMeta, Condition, KubeObject, duration/time helpers
* ``api.registry`` - every kind with its CRD names, scope, subresources, columns
* ``api.crdgen`` - ``python -m api.crdgen [--check]`` writes config/crd/
* ``api.structural`` - offline structural check, defaulting and pruning
* ``api.examples`` - example manifests and invalid objects used by the tests
"""

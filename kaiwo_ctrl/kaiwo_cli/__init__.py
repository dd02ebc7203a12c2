"""``kaiwo``: the command line for AI scientists.

Submit, list, inspect, follow and delete KaiwoJobs and KaiwoServices without
writing YAML. It talks to the cluster through the project's own async client
(:mod:`kaiwo_ctrl.runtime.api.client`), never through a kubectl subprocess.

Modules: :mod:`.config` (user defaults and their precedence), :mod:`.spec`
(building a workload from flags, files and directories, pure), :mod:`.output`
(tables, colour, ages), :mod:`.kube` (connection and error translation) and one
module per command.
"""

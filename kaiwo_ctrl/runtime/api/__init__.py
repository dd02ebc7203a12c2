"""Talking to the Kubernetes API server: connection settings (restconfig), the
connection pools and headers (transport), the wire format (wire), how a kind
and a failure are named (apitypes), list and watch bodies decoded as they
arrive (liststream, watchstream, streams), the client (client), the core
kinds (resources) and CRD structural defaulting (defaulting).

May import (lower layers): net, objects, process. Never a domain package, nor
the top-level ``api`` models.
"""

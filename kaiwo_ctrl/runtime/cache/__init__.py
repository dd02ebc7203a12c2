"""Informers and what they keep: one list+watch of a kind, its store and event
dispatch (informer, informerapi, store), shared by every controller of the
process (cache).

May import (lower layers): observe, api, net, objects, process. Never a domain
package, nor the top-level ``api`` models.
"""

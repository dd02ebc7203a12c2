"""Shared base classes and conventions for the typed CRD models.

Conventions (every model in ``api/`` follows them):

* Python attributes are snake_case; the JSON/YAML name is the camelCase alias
  (``gpus_per_replica`` <-> ``gpusPerReplica``). Where the seed's JSON name is
  not the camelCase of the attribute, give an explicit ``Field(alias=...)``.
* Models accept both the alias and the attribute name (``populate_by_name``).
* Unknown fields are ignored when *reading* (the apiserver prunes them anyway),
  so a model built from a cached dict never fails on a newer field.
* ``to_k8s()`` dumps by alias and drops ``None`` so we never write nulls.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        defer_build=True,  # each model is built on first use: ~30 ms less start-up, none is needed before the caches sync
        validate_default=False,
    )

    def to_k8s(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

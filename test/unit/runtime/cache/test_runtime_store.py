import pytest

from kaiwo_ctrl.runtime.cache.store import OWNER_UID_INDEX, Store, index_by_label


def obj(name, ns="a", labels=None, owners=(), rv="1"):
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels or {},
            "ownerReferences": [{"uid": u} for u in owners],
            "resourceVersion": rv,
        }
    }


def test_put_get_delete_and_namespace_index():
    s = Store()
    s.put(obj("x", "a"))
    s.put(obj("y", "b"))
    assert s.get("a/x")["metadata"]["name"] == "x"
    assert s.get_by("y", "b") is not None
    assert [o["metadata"]["name"] for o in s.list("a")] == ["x"]
    assert len(s.list()) == 2
    assert s.delete("a/x") is not None
    assert s.list("a") == [] and "a" not in s.index_values("namespace")


def test_indexes_follow_updates():
    s = Store({"team": index_by_label("team")})
    s.put(obj("x", labels={"team": "red"}, owners=["u1"]))
    assert [o["metadata"]["name"] for o in s.by_index("team", "red")] == ["x"]
    assert [o["metadata"]["name"] for o in s.by_index(OWNER_UID_INDEX, "u1")] == ["x"]
    s.put(obj("x", labels={"team": "blue"}, owners=["u2"], rv="2"))
    assert s.by_index("team", "red") == []
    assert s.by_index(OWNER_UID_INDEX, "u1") == []
    assert [o["metadata"]["resourceVersion"] for o in s.by_index("team", "blue")] == ["2"]


def test_late_indexer_backfills_and_duplicates_are_refused():
    s = Store()
    s.put(obj("x", labels={"app": "p"}))
    fn = index_by_label("app")
    s.add_indexer("app", fn)
    assert len(s.by_index("app", "p")) == 1
    s.add_indexer("app", fn)  # same function: no-op
    with pytest.raises(ValueError):
        s.add_indexer("app", index_by_label("other"))


def test_cluster_scoped_keys():
    s = Store()
    s.put({"metadata": {"name": "node-1"}})
    assert s.get("node-1") is not None and s.get_by("node-1") is not None

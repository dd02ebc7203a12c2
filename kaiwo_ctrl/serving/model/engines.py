"""What differs per engine in the server container: command, args, env, probes.

Each engine function takes an :class:`EngineInput` and returns the parts of
the ``server`` container that depend on the engine. Everything else (ports,
resources, volumes, credentials) is common and lives in :mod:`.pods`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kaiwo_ctrl.runtime.objects.fielderrors import FieldError

from kaiwo_ctrl.serving.model.urls import ModelURL

PORT = 8000
MODEL_DIR = "/model"


@dataclass(frozen=True)
class EngineInput:
    name: str
    url: ModelURL
    args: list[str]
    features: list[str]
    cache_dir: str | None  # set when a cache profile holds the weights
    has_adapters: bool


@dataclass(frozen=True)
class EngineParts:
    command: list[str] | None
    args: list[str]
    env: list[dict[str, Any]]
    startup: dict[str, Any]
    readiness: dict[str, Any]
    liveness: dict[str, Any]
    security_context: bool = True  # apply modelServerPods.securityContext


def _http(path: str, period: int, timeout: int, failures: int, initial: int = 0) -> dict[str, Any]:
    probe: dict[str, Any] = {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": timeout,
        "failureThreshold": failures,
    }
    if initial:
        probe["initialDelaySeconds"] = initial
    return probe


def _env(pairs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in pairs]


def _weights(inp: EngineInput) -> str:
    """Where engines other than vLLM find the weights.

    KubeAI passes the raw ``<claim>/<path>`` of a pvc:// URL to FasterWhisper
    and Infinity although the volume is mounted at /model [quirk]; here the
    mount point is used.
    """
    if inp.cache_dir:
        return inp.cache_dir
    if inp.url.scheme == "pvc":
        return MODEL_DIR
    return inp.url.ref


def vllm(inp: EngineInput) -> EngineParts:
    if inp.url.scheme == "pvc":
        model = MODEL_DIR
    elif inp.cache_dir:
        model = inp.cache_dir
    elif inp.url.scheme == "s3":
        model = inp.url.original
    else:
        model = inp.url.ref
    args = [f"--model={model}", f"--served-model-name={inp.name}"]
    if inp.url.scheme == "s3" and not inp.cache_dir:
        args.append("--load-format=runai_streamer")
    args += inp.args
    env: list[tuple[str, str]] = []
    if inp.has_adapters:
        args.append("--enable-lora")
        env.append(("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True"))
    return EngineParts(
        command=["python3", "-m", "vllm.entrypoints.openai.api_server"],
        args=args,
        env=_env(env),
        startup=_http("/health", 2, 2, 5400),
        readiness=_http("/health", 10, 2, 3),
        liveness=_http("/health", 30, 3, 3),
    )


def ollama_script(inp: EngineInput) -> str:
    """The startup probe fetches the model (the server must run for the CLI to work)."""
    name = shlex.quote(inp.name)
    if inp.url.scheme == "pvc":
        if not inp.url.model_param:
            # KubeAI builds a probe that can never succeed [quirk]; refuse it instead.
            raise FieldError("spec.url", "pvc:// urls for engine OLlama need ?model=<tag>", inp.url.original)
        script = f"/bin/ollama cp {shlex.quote(inp.url.model_param)} {name}"
    elif inp.url.scheme == "ollama":
        ref = shlex.quote(inp.url.ref)
        script = f"/bin/ollama cp {ref} {name}"
        if inp.url.pull:
            pull = "/bin/ollama pull " + ("--insecure " if inp.url.insecure else "") + ref
            script = f"{pull} && {script}"
    else:
        raise FieldError("spec.url", f"engine OLlama serves ollama:// or pvc:// urls, not {inp.url.scheme}://", inp.url.original)
    if "TextGeneration" in inp.features:
        script += f" && /bin/ollama run {name} hi"  # load the weights before the Pod turns Ready
    return script


def ollama(inp: EngineInput) -> EngineParts:
    env = [("OLLAMA_HOST", f"0.0.0.0:{PORT}"), ("OLLAMA_KEEP_ALIVE", "999999h")]
    if inp.url.scheme == "pvc":
        env.append(("OLLAMA_MODELS", MODEL_DIR))
    startup = {
        "exec": {"command": ["bash", "-c", ollama_script(inp)]},
        "initialDelaySeconds": 1,
        "periodSeconds": 3,
        "timeoutSeconds": 10800,
        "failureThreshold": 10,
    }
    return EngineParts(
        command=None,
        args=list(inp.args),
        env=_env(env),
        startup=startup,
        readiness=_http("/", 10, 2, 3),
        liveness=_http("/", 30, 3, 3, initial=900),
    )


def faster_whisper(inp: EngineInput) -> EngineParts:
    return EngineParts(
        command=None,
        args=list(inp.args),
        env=_env([("WHISPER__MODEL", _weights(inp)), ("ENABLE_UI", "false")]),
        startup=_http("/health", 2, 2, 900),
        readiness=_http("/health", 10, 2, 3),
        liveness=_http("/health", 30, 3, 3),
    )


def infinity(inp: EngineInput) -> EngineParts:
    env = [
        ("INFINITY_MODEL_ID", _weights(inp)),
        ("INFINITY_SERVED_MODEL_NAME", inp.name),
        ("INFINITY_URL_PREFIX", "/v1"),
        ("INFINITY_ENGINE", "torch"),
        ("INFINITY_PORT", str(PORT)),
    ]
    return EngineParts(
        command=None,
        args=["v2", *inp.args],
        env=_env(env),
        startup=_http("/health", 2, 2, 600),
        readiness=_http("/health", 10, 2, 3),
        liveness=_http("/health", 30, 3, 3),
        security_context=False,
    )


ENGINES: dict[str, Callable[[EngineInput], EngineParts]] = {
    "VLLM": vllm,
    "OLlama": ollama,
    "FasterWhisper": faster_whisper,
    "Infinity": infinity,
}

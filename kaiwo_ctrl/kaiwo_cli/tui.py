"""``kaiwo manage``: a keyboard-only terminal UI on Textual.

A filterable table of the user's workloads (refreshed every few seconds) and
an output pane. Keys act on the selected row: ``l`` logs, ``f`` follow logs,
``e`` run a command, ``s`` an interactive shell (the UI steps aside), ``p``
port-forward (``x`` stops them), ``m`` GPU monitor, ``d`` delete (asks), ``/``
filter, ``r`` refresh, ``q`` quit. Everything goes through the same functions as
the commands of the same names.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Input, Label, RichLog, Static

from kaiwo_ctrl.runtime.api.client import ApiError, Client
from kaiwo_ctrl.runtime.api.resources import PODS

from . import channels as ch
from . import cmd_list, gpustats, streams, views
from .children import workload_pods
from .sanitize import Styled, inert
from .cmd_delete import delete_workload
from .cmd_logs import containers, log_lines, not_running
from .cmd_port_forward import parse_ports
from .errors import CliError
from .kube import explain
from .podpick import pick_container, target_pod

COLUMNS = ("NAME", "KIND", "STATUS", "QUEUE", "GPUS", "AGE")


@dataclass
class Options:
    namespace: str
    user: str | None
    metrics_endpoint: str | None = None
    refresh: float = 3.0
    #: passed on to the ``kaiwo exec -it`` the shell key runs
    connection_args: tuple[str, ...] = ()


class Confirm(ModalScreen[bool]):
    """y / n (Esc: no)."""

    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
                Binding("escape", "answer(False)", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Vertical(Label(self.question), Label("y: yes    n / Esc: no"), id="dialog")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Ask(ModalScreen["str | None"]):
    """One line of text (Enter), or nothing (Esc)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, question: str, placeholder: str = "") -> None:
        super().__init__()
        self.question, self.placeholder = question, placeholder

    def compose(self) -> ComposeResult:
        yield Vertical(Label(self.question), Input(placeholder=self.placeholder, id="answer"), id="dialog")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ManageApp(App[int]):
    TITLE = "kaiwo manage"
    CSS = """
    #filter { height: 3; }
    #workloads { height: 1fr; }
    #output { height: 1fr; border-top: solid $accent; }
    #status { height: 1; color: $text-muted; }
    #dialog { width: 70; height: auto; padding: 1 2; border: thick $accent; background: $surface; }
    Confirm, Ask { align: center middle; }
    """
    BINDINGS = [
        Binding("slash", "filter", "Filter"), Binding("l", "logs", "Logs"), Binding("f", "follow", "Follow"),
        Binding("e", "exec", "Exec"), Binding("s", "shell", "Shell"), Binding("p", "port_forward", "Port-fwd"),
        Binding("x", "stop_forwards", "Stop fwd"), Binding("m", "monitor", "Monitor"),
        Binding("d", "delete", "Delete"), Binding("r", "refresh", "Refresh"), Binding("q", "quit", "Quit"),
        Binding("escape", "focus_table", "Table", show=False),
    ]

    def __init__(self, client: Client, options: Options) -> None:
        super().__init__()
        self.client, self.options = client, options
        self.items: dict[str, dict[str, Any]] = {}
        self.forwards: list[asyncio.Task] = []

    # ------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Input(placeholder="/ filter by name, kind or status; Enter or Esc returns to the table", id="filter")
        yield DataTable(id="workloads", cursor_type="row", zebra_stripes=True)
        yield Static(id="status")
        yield RichLog(id="output", max_lines=5000, wrap=True, markup=False)
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self.query_one(DataTable).focus()
        await self.reload()
        self.set_interval(self.options.refresh, self.reload)

    @property
    def out(self) -> RichLog:
        return self.query_one(RichLog)

    def say(self, text: str) -> None:
        """A line of ours, quoting the server: made inert (logs and exec output are written raw)."""
        self.out.write(inert(text, layout=True))

    # ------------------------------------------------------------ the table
    async def reload(self) -> None:
        try:
            found = await cmd_list.fetch(self.client, self.options.namespace)
        except Exception as e:  # noqa: BLE001 - shown, and the next refresh tries again
            self.query_one("#status", Static).update(Text(inert(f"cannot list workloads: {e}")))
            return
        mine = cmd_list.select(found, self.options.user, None)
        self.items = {f"{o['kind']}/{o['metadata']['name']}": o for o in mine}
        self.redraw()

    def redraw(self) -> None:
        table = self.query_one(DataTable)
        wanted = self.query_one("#filter", Input).value.strip().lower()
        selected = self.selected_key()
        table.clear()
        _, rows = cmd_list.rows(list(self.items.values()), False, False)
        for key, row in zip(self.items, rows):
            cells = [inert(c) for c in row[:6]]
            if wanted and not any(wanted in c.lower() for c in cells[:3]):
                continue
            # Text: no markup read from the server's strings; our own colour codes become styles
            table.add_row(*(Text.from_ansi(c) if isinstance(c, Styled) else Text(c) for c in cells), key=key)
        if selected is not None and selected in table.rows:
            table.move_cursor(row=table.get_row_index(selected))
        who = self.options.user or "every user"
        self.query_one("#status", Static).update(
            f"namespace {self.options.namespace} · {who} · {table.row_count}/{len(self.items)} workloads"
            + (f" · filter {wanted!r}" if wanted else "") + f" · {len(self.forwards)} port-forward(s)")

    def selected_key(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def selected(self) -> dict[str, Any] | None:
        key = self.selected_key()
        obj = self.items.get(key) if key else None
        if obj is None:
            self.say("no workload selected")
        return obj

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.action_focus_table()

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_focus_table(self) -> None:
        self.query_one(DataTable).focus()

    async def action_refresh(self) -> None:
        await self.reload()

    # ------------------------------------------------------------ actions
    def _run(self, what: str, job: Callable[[], Awaitable[None]], group: str = "view") -> None:
        """Run an action in the background; a CliError is shown, not raised."""
        async def guarded() -> None:
            try:
                await job()
            except CliError as e:
                self.say(f"{what}: {e.message}")
        self.run_worker(guarded(), group=group, exclusive=group == "view")

    def action_logs(self, follow: bool = False) -> None:
        obj = self.selected()
        if obj is None:
            return
        self.out.clear()

        async def job() -> None:
            pods = await workload_pods(self.client, obj)
            if not pods:
                self.say(f"{obj['metadata']['name']}: no pods yet")
            for pod in pods[:1] if follow else pods:
                why = not_running(pod)
                for c in [] if why else containers(pod, None):
                    async for line in log_lines(self.client, pod, c, follow, None if follow else 200):
                        self.out.write(f"[{pod['metadata']['name']}/{c}] {line}")
                if why:
                    self.say(why)
        self._run("logs", self._api(job))

    def action_follow(self) -> None:
        self.action_logs(follow=True)

    def _api(self, job: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """API errors of a background action become messages."""
        async def wrapped() -> None:
            try:
                await job()
            except ApiError as e:
                raise explain(e, self.client) from None
        return wrapped

    @work
    async def action_exec(self) -> None:
        obj = self.selected()
        if obj is None:
            return
        command = await self.push_screen_wait(Ask(f"Command to run in {obj['metadata']['name']}", "e.g. nvidia-smi"))
        if not command:
            return
        self.out.clear()
        self._run("exec", self._api(lambda: self._exec(obj, shlex.split(command))))

    async def _exec(self, obj: dict[str, Any], command: list[str]) -> None:
        ns = obj["metadata"]["namespace"]
        _, pod = await target_pod(self.client, ns, workload_ref(obj), None)
        container = pick_container(pod, None)
        await streams.check_access(self.client, ns, "exec")
        ws = await streams.connect(self.client, PODS.path(ns, pod["metadata"]["name"], "exec"),
                                   streams.exec_query(container, command, stdin=False, tty=False),
                                   ch.EXEC_PROTOCOL, ns, "exec")
        pending = {ch.STDOUT: b"", ch.STDERR: b""}

        def output(channel: int, data: bytes) -> None:
            *lines, pending[channel] = (pending[channel] + data).split(b"\n")
            for line in lines:
                self.out.write(line.decode(errors="replace"))
        code = await streams.run_exec(ws, output)
        for rest in pending.values():
            if rest:
                self.out.write(rest.decode(errors="replace"))
        self.say(f"[exit code {code}] {' '.join(command)} in {pod['metadata']['name']}/{container}")

    def action_shell(self) -> None:
        obj = self.selected()
        if obj is None:
            return
        argv = [sys.executable, "-m", "kaiwo_ctrl.kaiwo_cli", "exec", workload_ref(obj), "-n",
                obj["metadata"]["namespace"], "-it", *self.options.connection_args, "--command", "sh"]
        try:
            with self.suspend():
                subprocess.run(argv, check=False)
        except Exception as e:  # noqa: BLE001 - e.g. SuspendNotSupported when headless
            self.say(f"shell: cannot hand the terminal over here ({type(e).__name__}); "
                           f"run: kaiwo exec {workload_ref(obj)} -it --command sh")

    @work
    async def action_port_forward(self) -> None:
        obj = self.selected()
        if obj is None:
            return
        spec = await self.push_screen_wait(Ask(f"Ports to forward to {obj['metadata']['name']}", "[LOCAL:]REMOTE, e.g. 8000"))
        if not spec:
            return
        try:
            mappings = parse_ports(spec.split())
        except CliError as e:
            self.say(f"port-forward: {e.message}")
            return
        ns = obj["metadata"]["namespace"]

        async def job() -> None:
            _, pod = await target_pod(self.client, ns, workload_ref(obj), None)
            await streams.check_access(self.client, ns, "portforward")

            def ready(bound: list[tuple[str, int, int]]) -> None:
                for address, local, remote in bound:
                    self.say(f"Forwarding from {address}:{local} -> {remote} (pod {pod['metadata']['name']}); x stops")
            await streams.forward(self.client, ns, pod["metadata"]["name"], mappings, "127.0.0.1", ready)
        task = asyncio.ensure_future(self._api(job)())
        task.add_done_callback(lambda t: self._forward_done(t))
        self.forwards.append(task)
        self.redraw()

    def _forward_done(self, task: asyncio.Task) -> None:
        if task in self.forwards:
            self.forwards.remove(task)
        if not task.cancelled() and isinstance(task.exception(), CliError):
            self.say(f"port-forward: {task.exception().message}")  # type: ignore[union-attr]

    def action_stop_forwards(self) -> None:
        for t in list(self.forwards):
            t.cancel()
        self.say("port-forwards stopped")

    def action_monitor(self) -> None:
        obj = self.selected()
        if obj is None:
            return
        ns = obj["metadata"]["namespace"]

        async def job() -> None:
            url = views.endpoint_of(self.options.metrics_endpoint)
            while True:
                pods = [p["metadata"]["name"] for p in await workload_pods(self.client, obj)]
                samples = gpustats.for_pods(gpustats.parse_utilisation(await views.scrape(self.client, url)), ns, pods)
                self.out.clear()
                self.say(f"GPU utilisation of {workload_ref(obj)} (every {self.options.refresh:g}s; l/f/m switch)")
                for pod, container, gpu, util in gpustats.monitor_rows(samples) or [["(no GPU samples)", "", "", ""]]:
                    self.say(f"  {pod:<40} {container:<12} {gpu:<12} {util:>7}")
                await asyncio.sleep(self.options.refresh)
        self._run("monitor", self._api(job))

    @work
    async def action_delete(self) -> None:
        obj = self.selected()
        if obj is None:
            return
        label = workload_ref(obj)
        if not await self.push_screen_wait(Confirm(f"Delete {label} in {obj['metadata']['namespace']} "
                                                   "and everything it created?")):
            self.say(f"{label}: not deleted")
            return

        async def job() -> None:
            await delete_workload(self.client, obj)
            self.say(f"{label} deleted")
            await self.reload()
        self._run("delete", self._api(job), group="delete")


def workload_ref(obj: dict[str, Any]) -> str:
    """``job/NAME`` or ``service/NAME``, as the commands take it."""
    return ("service/" if obj["kind"] == "KaiwoService" else "job/") + obj["metadata"]["name"]

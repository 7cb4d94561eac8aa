"""What the HTTP verbs call (implemented by ``extender.service.TopologyExtender``), and what
they translate pods with. Its own module, so the server and the verbs both import it and
neither imports the other's back."""

from __future__ import annotations

from typing import Any, Coroutine, Mapping, Protocol, Sequence

from extender.core.model import PodFacts
from extender.core.verdicts import FilterVerdict
from extender.service.answers import GangView


class ExtenderHandler(Protocol):
    def filter(self, pod: PodFacts, node_names: list[str]) -> FilterVerdict: ...
    def filter_now(self, pod: PodFacts, node_names: list[str]) -> FilterVerdict | None: ...  # never waits
    def prioritize(self, pod: PodFacts, node_names: list[str]) -> list[tuple[str, int]]: ...  # scores 0..10
    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...  # may block for minutes
    def bind_now(self, namespace: str, name: str, uid: str, node: str) -> Coroutine[Any, Any, None] | None: ...
    def preempt(self, pod: PodFacts, victims: dict[str, list[str]]) -> dict[str, list[str]]: ...
    def ready(self) -> bool: ...
    def debug_gangs(self) -> Sequence[GangView]: ...


class PodTranslator(Protocol):
    """``adapters.kubeobjects.Translator``."""

    def pod(self, obj: Mapping[str, Any]) -> PodFacts: ...

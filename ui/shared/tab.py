"""What every tab's ``build()`` hands the app: one shape for all of them.

    tab = compare.build(examples)
    tab.links            # the settings a link carries: name -> component (ui.shared.links)
    tab.shared           # state other tabs read: name -> gr.State (side by side's last run, for hindsight)
    tab.on_load          # wiring that needs the page's load event: on_load(load, selected), or None
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tab:
    links: dict
    shared: dict = field(default_factory=dict)
    on_load: Callable | None = None

"""Host-side time of a Session's runs, measured on this machine: what the IPU model leaves out.

Between two runs the program's own Python (the data loader, its per-sample transforms, the
training loop) runs on the host; inside ``Session.run`` the framework checks inputs and makes
outputs around the execution. Both would be the same on an IPU system's host. The simulated
execution itself is not counted: on hardware the device does that work, and the IPU model
estimates its time (``Session.report()``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["HostTiming"]


@dataclass
class HostTiming:
    """Seconds measured over a Session's runs while attached.

    ``between_runs_s``: from the end of one ``run`` to the start of the next (the first run of
    each attachment has no gap); ``framework_s``: inside ``run`` but outside the simulated
    execution; ``simulated_s``: the simulated execution (not host-side time).
    """

    runs: int = 0
    gaps: int = 0
    between_runs_s: float = 0.0
    framework_s: float = 0.0
    simulated_s: float = 0.0
    _last_end: float | None = None

    @property
    def host_side_s_per_run(self) -> float:
        """Measured host-side seconds per run: the mean gap between runs plus the framework's
        time inside one (0 before any run)."""
        if not self.runs:
            return 0.0
        gap = self.between_runs_s / self.gaps if self.gaps else 0.0
        return gap + self.framework_s / self.runs

    def record(self, started: float, simulated: float) -> None:
        """Count a run that began at ``started`` (``time.perf_counter``), ends now and spent
        ``simulated`` seconds in the simulated execution."""
        now = time.perf_counter()
        if self._last_end is not None:
            self.between_runs_s += started - self._last_end
            self.gaps += 1
        self.runs += 1
        self.simulated_s += simulated
        self.framework_s += now - started - simulated
        self._last_end = now

    def detach(self) -> None:
        """Time while detached is not between runs."""
        self._last_end = None

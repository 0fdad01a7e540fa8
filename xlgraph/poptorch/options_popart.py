"""``Options._Popart`` (PopART's own options, set by name) and ``Options.Distributed``
(instances and replicas over processes).
"""

from __future__ import annotations

import os
from typing import Any

from xlgraph.poptorch.checks import whole
from xlgraph.poptorch.options_dict import OptionsDict


class _PopartOptions(OptionsDict):
    """``opts._Popart``: PopART session options, recorded (xlgraph has no PopART)."""

    def __init__(self) -> None:
        super().__init__()
        object.__setattr__(self, "engine_options", {})
        object.__setattr__(self, "patterns", {})

    def set(self, key: str, value: Any) -> _PopartOptions:  # type: ignore[override]
        """Record a PopART option (``opts._Popart.set("saveInitializersToFile", "x.onnx")``)."""
        self.checkIsFrozen()
        self._values[key] = value
        return self

    def setEngineOptions(self, engine_options: dict[str, str]) -> _PopartOptions:  # noqa: N802
        self.checkIsFrozen()
        self.engine_options.update(engine_options)
        return self

    def setPatterns(self, patterns: dict[str, bool], level: int = 2,  # noqa: N802
                    ) -> _PopartOptions:
        level = whole("_Popart.setPatterns", "level", level, 0, 3)  # PopART's PatternsLevel
        self.checkIsFrozen()
        self.patterns.update(patterns)
        self._values["patterns_level"] = level
        return self


class _DistributedOptions(OptionsDict):
    """``opts.Distributed``: this process's rank among ``numProcesses`` (xlgraph-run/MPI)."""

    def __init__(self) -> None:
        super().__init__(var_process_id="OMPI_COMM_WORLD_RANK",
                         var_num_processes="OMPI_COMM_WORLD_SIZE", process_id=None,
                         num_processes=None)

    def disable(self) -> _DistributedOptions:
        """One process, whatever the environment says."""
        return self.configureProcessId(0, 1)

    def setEnvVarNames(self, var_num_processes: str, var_process_id: str,  # noqa: N802
                       ) -> _DistributedOptions:
        """Read the process count and id from these environment variables."""
        self.checkIsFrozen()
        self._values.update(var_num_processes=var_num_processes, var_process_id=var_process_id)
        return self

    def configureProcessId(self, process_id: int, num_processes: int,  # noqa: N802
                           ) -> _DistributedOptions:
        """Set this process's id and the process count explicitly."""
        setter = "Distributed.configureProcessId"
        num_processes = whole(setter, "num_processes", num_processes)
        process_id = whole(setter, "process_id", process_id, 0, num_processes - 1)
        self.checkIsFrozen()
        self._values.update(process_id=process_id, num_processes=num_processes)
        return self

    @property
    def processId(self) -> int:  # noqa: N802
        """This process's id (the environment's, unless configured)."""
        value = self._values["process_id"]
        return int(os.environ.get(self._values["var_process_id"], 0)) if value is None else value

    @property
    def numProcesses(self) -> int:  # noqa: N802
        """How many processes run the program (the environment's, unless configured)."""
        value = self._values["num_processes"]
        return int(os.environ.get(self._values["var_num_processes"], 1)) if value is None \
            else value

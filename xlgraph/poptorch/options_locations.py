"""``Options.TensorLocations`` and ``TensorLocationSettings``: where weights, activations,
optimiser state and accumulators live (on chip, streaming memory, replica-sharded).
"""

from __future__ import annotations

from xlgraph.poptorch.checks import OptionValueError, whole
from xlgraph.poptorch.options_dict import OptionsDict

__all__ = ["TensorLocationSettings"]


class TensorLocationSettings(OptionsDict):
    """Where a class of tensors lives (recorded: the simulator keeps every tensor on chip)."""

    def __init__(self) -> None:
        super().__init__(on_chip=True, replicated_tensor_sharding=False,
                         min_elements_for_off_chip=0, min_elements_for_rts=0,
                         io_tiles_to_load=False, io_tiles_to_store=False)

    def minElementsForOffChip(self, min_elements: int) -> TensorLocationSettings:  # noqa: N802
        """Smallest tensor kept off chip (recorded)."""
        return self._set("min_elements_for_off_chip", whole(
            "TensorLocationSettings.minElementsForOffChip", "min_elements", min_elements, 0,
            2**63 - 1))

    def minElementsForReplicatedTensorSharding(  # noqa: N802
            self, min_elements: int) -> TensorLocationSettings:
        """Smallest tensor sharded over replicas (recorded)."""
        return self._set("min_elements_for_rts", whole(
            "TensorLocationSettings.minElementsForReplicatedTensorSharding", "min_elements",
            min_elements, 0, 2**63 - 1))

    def useOnChipStorage(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        """Keep these tensors on chip (recorded; always on chip here)."""
        return self._set("on_chip", use)

    def useReplicatedTensorSharding(self, use: bool = True,  # noqa: N802
                                    ) -> TensorLocationSettings:
        """Shard these tensors over replicas (recorded)."""
        return self._set("replicated_tensor_sharding", use)

    def useIOTilesToLoad(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        """Load these tensors through IO tiles (recorded)."""
        return self._set("io_tiles_to_load", use)

    def useIOTilesToStore(self, use: bool = True) -> TensorLocationSettings:  # noqa: N802
        """Store these tensors through IO tiles (recorded)."""
        return self._set("io_tiles_to_store", use)


class _TensorLocationOptions(OptionsDict):
    """``opts.TensorLocations``: IO tiles (modelled) and tensor locations (recorded)."""

    def __init__(self) -> None:
        super().__init__(num_io_tiles=0, activation=None, weight=None, optimizer=None,
                         accumulator=None)

    def numIOTiles(self, num_tiles: int) -> _TensorLocationOptions:  # noqa: N802
        """Tiles reserved for IO (the ipu_model spreads compute over the others)."""
        if isinstance(num_tiles, bool) or not isinstance(num_tiles, int) or \
                not 32 <= num_tiles <= 192 or num_tiles % 2:
            raise OptionValueError(f"numIOTiles must be an even number between 32 and 192. "
                                   f"(TensorLocations.numIOTiles: num_tiles={num_tiles!r})")
        return self._set("num_io_tiles", num_tiles)

    def _location(self, key: str, location: TensorLocationSettings) -> _TensorLocationOptions:
        if not isinstance(location, TensorLocationSettings):
            raise TypeError(f"expected a poptorch.TensorLocationSettings, got "
                            f"{type(location).__name__}")
        self.checkIsFrozen()
        self._values[key] = location
        return self

    def setActivationLocation(self, location: TensorLocationSettings,  # noqa: N802
                              ) -> _TensorLocationOptions:
        return self._location("activation", location)

    def setWeightLocation(self, location: TensorLocationSettings,  # noqa: N802
                          ) -> _TensorLocationOptions:
        return self._location("weight", location)

    def setOptimizerLocation(self, location: TensorLocationSettings,  # noqa: N802
                             ) -> _TensorLocationOptions:
        return self._location("optimizer", location)

    def setAccumulatorLocation(self, location: TensorLocationSettings,  # noqa: N802
                               ) -> _TensorLocationOptions:
        return self._location("accumulator", location)

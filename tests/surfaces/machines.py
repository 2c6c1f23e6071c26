"""Custom machines the surface tests name by import path (``tests.surfaces.machines:...``),
as a user's project would name its own."""

from __future__ import annotations

from innerloop.examples import CostCap, with_cost_cap
from innerloop.fsm import MachineSpec

COSTCAP: MachineSpec = with_cost_cap(CostCap(max_cost_usd=1.0), lambda spending, state: True)
"""The cost-cap example: a spec without an import path of its own, so a run records none
and readers find it only through ``--spec tests.surfaces.machines:COSTCAP``."""

"""Where the published facts are: `FACTS`, the file shipped with coordsim that
`sim.model.validate` holds the model to. Apart from that module, which imports
the experiments, so that `coordsim validate --help` can name the file alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["FACTS"]

#: The facts shipped with coordsim.
FACTS: Final = Path(__file__).with_name("facts.toml")

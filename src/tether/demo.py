"""The demo: a scripted model (named as such, no API key) and two small tools, so a session
runs end to end anywhere. `tether demo` and `make demo` run it on the SQLite store."""

from __future__ import annotations

import asyncio

from tether.testing.scripted import ScriptedModel, call
from tether.tools.base import tool

_FORECASTS = {"paris": "light rain, 14 °C", "lisbon": "sunny, 22 °C", "oslo": "snow, -3 °C"}

DEMO_TASK = "Where should we have a picnic on Saturday: Paris, Atlantis or Lisbon?"


@tool(effect="read", timeout=5)
async def forecast(city: str) -> str:
    """Saturday's weather forecast for a city.

    Args:
        city: The city's name, e.g. "Paris".
    """
    await asyncio.sleep(0.05)  # as a real weather service would take a moment
    key = city.strip().lower()
    if key not in _FORECASTS:
        raise LookupError(f"no forecast for {city!r}; known cities: Paris, Lisbon, Oslo")
    return _FORECASTS[key]


@tool(effect="write")
def save_plan(place: str, note: str = "") -> str:
    """Write the picnic plan down.

    Args:
        place: Where the picnic will be.
        note: Anything to remember.
    """
    return f"saved: picnic in {place}" + (f" ({note})" if note else "")


tools = [forecast, save_plan]


def demo_model() -> ScriptedModel:
    """A scripted model that plays a careful assistant: it asks for three forecasts at once,
    one of which fails, then saves a plan and answers."""
    return ScriptedModel(
        [
            [
                call("forecast", city="Paris"),
                call("forecast", city="Atlantis"),
                call("forecast", city="Lisbon"),
            ],
            call("save_plan", place="Lisbon", note="sunny, 22 °C; Atlantis has no forecast"),
            "Lisbon: sunny and 22 °C on Saturday. Paris expects rain, and Atlantis has no "
            "forecast at all. I saved the plan.",
        ],
        name="scripted:demo",
    )

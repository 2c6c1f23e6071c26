"""Typed output with a repair: the model's first answer breaks the type, is sent back
with what is wrong, and the second is the typed value (the real OpenAI client against a
loopback Chat Completions server).

    python examples/typed_output.py
"""

from __future__ import annotations

from pydantic import BaseModel

from innerloop import Harness, HarnessParams
from innerloop.providers import OpenAIProvider
from innerloop.testing import OpenAIServer, reply


class Weather(BaseModel):
    city: str
    celsius: float


def main() -> None:
    script = [
        reply('{"city": "Lisbon", "celsius": "warm"}'),  # breaks the type: repaired
        reply('{"city": "Lisbon", "celsius": 21.5}'),
    ]
    with OpenAIServer(script) as server:
        provider = OpenAIProvider("sk-test", base_url=server.base_url)
        params = HarnessParams(
            model="openai:gpt-4o-mini-2024-07-18", output_type=Weather, max_output_repairs=2
        )
        state = Harness(params, [provider]).run_sync("Weather in Lisbon, as JSON?")
        sent = server.requests[0].body["response_format"]["type"]
    weather = state.output
    assert isinstance(weather, Weather)
    print(state.exit_reason, state.output_repairs, sent)
    print(f"{weather.city}: {weather.celsius:.1f} C")


if __name__ == "__main__":
    main()

"""EndpointPolicy: a model URL is allowed only under an operator's prefix or a configured
provider, and a name that resolves to a non-public address is refused. Every look-up here is
a stub: nothing leaves the process."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tether.errors import ConfigError
from tether.providers.endpoints import EndpointPolicy, EndpointRefused, configured_endpoints

NOT_PUBLIC = [
    "127.0.0.1",  # loopback
    "127.8.9.10",
    "::1",
    "10.1.2.3",  # private
    "172.16.0.1",
    "192.168.1.1",
    "fd00:ec2::254",  # unique local (a cloud's IPv6 metadata address)
    "169.254.169.254",  # link-local: the cloud metadata address
    "fe80::1",
    "100.64.0.1",  # shared address space
    "0.0.0.0",
    "::",
    "::ffff:127.0.0.1",  # IPv4-mapped loopback
    "::ffff:169.254.169.254",
    "224.0.0.1",  # multicast
    "198.18.0.1",  # benchmarking
    "192.0.2.10",  # documentation
]


def resolving_to(*addresses: str) -> tuple[list[tuple[str, int]], object]:
    asked: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> Sequence[str]:
        asked.append((host, port))
        return addresses

    return asked, resolve


def never_resolve(host: str, port: int) -> Sequence[str]:
    raise AssertionError(f"{host} must not be looked up")


def test_a_url_under_no_allowed_prefix_is_refused() -> None:
    policy = EndpointPolicy(("http://127.0.0.1:9001/v1",), resolve=never_resolve)
    with pytest.raises(EndpointRefused, match="not an endpoint this server allows"):
        policy.check("http://127.0.0.1:9002/v1/chat/completions")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9001/v10/chat/completions",  # not at a segment boundary
        "http://127.0.0.1:90010/v1/chat/completions",
        "http://127.0.0.1:9001.evil.example/v1/chat/completions",
        "https://127.0.0.1:9001/v1/chat/completions",  # another scheme
        "http://127.0.0.2:9001/v1/chat/completions",
        "http://127.0.0.1:9001/chat/completions",
    ],
)
def test_a_prefix_matches_its_origin_and_path_only(url: str) -> None:
    policy = EndpointPolicy(("http://127.0.0.1:9001/v1",), resolve=never_resolve)
    with pytest.raises(EndpointRefused):
        policy.check(url)


def test_a_prefix_that_names_an_address_allows_it_without_a_look_up() -> None:
    policy = EndpointPolicy(("http://127.0.0.1:9001/v1/",), resolve=never_resolve)
    policy.check("http://127.0.0.1:9001/v1/chat/completions")
    policy.check("http://127.0.0.1:9001/v1")


@pytest.mark.parametrize(
    "url",
    [
        "http://user:secret@127.0.0.1:9001/v1/chat/completions",
        "http://127.0.0.1:9001@127.0.0.1:9001/v1",
        "http://127.0.0.1:9001/v1/../admin",
        "http://127.0.0.1:9001/v1/%2e%2e/admin",
        "http://127.0.0.1:9001/v1?x=/chat/completions",
        "http://127.0.0.1:9001/v1#frag",
        "http://127.0.0.1:9001\\v1",
        "http://127.0.0.1:9001/v1 /chat",
        "file:///etc/passwd",
        "gopher://127.0.0.1:9001/v1",
        "http:///v1",
        "http://127.0.0.1:99999/v1",
    ],
)
def test_urls_that_could_mislead_a_prefix_check_are_refused(url: str) -> None:
    policy = EndpointPolicy(("http://127.0.0.1:9001/v1",), resolve=never_resolve)
    with pytest.raises(EndpointRefused):
        policy.check(url)


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_a_name_resolving_to_a_non_public_address_is_refused(address: str) -> None:
    asked, resolve = resolving_to("93.184.216.34", address)
    policy = EndpointPolicy(("https://*",), resolve=resolve)  # type: ignore[arg-type]
    with pytest.raises(EndpointRefused, match="not a public address"):
        policy.check("https://models.example.com/v1/chat/completions")
    assert asked == [("models.example.com", 443)]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_a_literal_non_public_address_under_a_wildcard_is_refused(address: str) -> None:
    literal = f"[{address}]" if ":" in address else address
    policy = EndpointPolicy(("http://*",), resolve=resolving_to(address)[1])  # type: ignore[arg-type]
    with pytest.raises(EndpointRefused, match="not a public address"):
        policy.check(f"http://{literal}/v1/chat/completions")


def test_a_host_name_prefix_does_not_vouch_for_where_the_name_points() -> None:
    """The operator named a host, not an address: a name repointed at the metadata address
    is refused all the same."""
    _, resolve = resolving_to("169.254.169.254")
    policy = EndpointPolicy(("https://models.example.com/v1",), resolve=resolve)  # type: ignore[arg-type]
    with pytest.raises(EndpointRefused, match=r"169\.254\.169\.254"):
        policy.check("https://models.example.com/v1/chat/completions")


def test_a_public_name_under_an_allowed_prefix_passes() -> None:
    asked, resolve = resolving_to("93.184.216.34", "2606:2800:220:1::1")
    policy = EndpointPolicy(("https://models.example.com/v1",), resolve=resolve)  # type: ignore[arg-type]
    policy.check("https://models.example.com/v1/chat/completions")
    assert asked == [("models.example.com", 443)]


def test_a_provider_configured_in_the_environment_is_trusted_as_it_is() -> None:
    configured = configured_endpoints(
        {"OLLAMA_HOST": "localhost:11434", "VLLM_BASE_URL": "http://10.0.0.5:8000/v1"},
        ["https://api.anthropic.com"],
    )
    assert configured == (
        "https://api.anthropic.com",
        "http://10.0.0.5:8000/v1",
        "http://localhost:11434",
    )
    policy = EndpointPolicy(configured=configured, resolve=never_resolve)
    policy.check("http://localhost:11434/api/chat")
    policy.check("http://10.0.0.5:8000/v1/chat/completions")
    policy.check("https://api.anthropic.com/v1/messages")
    with pytest.raises(EndpointRefused):
        policy.check("http://localhost:8000/v1/chat/completions")  # vLLM's default, not set


def test_a_bad_allowed_prefix_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--allow-endpoint"):
        EndpointPolicy(("ftp://models/",))

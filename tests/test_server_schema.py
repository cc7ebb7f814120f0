"""Property-based API testing of our server with schemathesis: generated requests from /openapi.json, sent over
HTTP to a real server on 127.0.0.1 (tiny model, so generations are quick): never a 5xx, never off-schema."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from app.server import create_app
from tests.local_http import serving


@pytest.fixture(scope="module")
def tiny_api(tiny_client):
    with serving(create_app(client=tiny_client, served_name="tiny", default_max_tokens=16)) as base:
        yield base


def test_generated_requests_never_break_the_server(tiny_api):
    schema = schemathesis.openapi.from_url(f"{tiny_api}/openapi.json")

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy())
    def check(case):
        if isinstance(case.body, dict):
            # Keep generations short: the property is about request handling, not long answers.
            for key in ("max_tokens", "max_completion_tokens"):
                if isinstance(case.body.get(key), int):
                    case.body[key] = min(case.body[key], 8)
        case.call_and_validate(base_url=tiny_api, timeout=60)

    check()

"""Every error the API answers, in OpenAI's error shape (which the SDKs turn into typed errors), with a message for
the client and nothing of the server's internals; and their OpenAPI documentation for the routes."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.frontends.api.chat_completions.chat_protocol import APIError, ErrorBody, error_response
from app.frontends.api.metrics import ServerMetrics


def documented_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error answers a route can give."""
    return {status: {"model": ErrorBody} for status in statuses}


def add_error_handlers(app: FastAPI, metrics: ServerMetrics) -> None:
    """Answer refusals, invalid requests, unknown routes and failures alike, each counted by its kind."""

    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        metrics.errors.labels(exc.kind).inc()
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        metrics.errors.labels("invalid_request_error").inc()
        message, param = _validation_message(exc.errors()[0] if exc.errors() else {})
        return error_response(422, message, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        metrics.errors.labels("invalid_request_error").inc()
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def server_error(_: Request, exc: Exception) -> JSONResponse:  # logged by uvicorn, traceback included
        metrics.errors.labels("server_error").inc()
        return error_response(500, "The server failed to answer this request.", kind="server_error")


def _validation_message(error: dict[str, Any]) -> tuple[str, str | None]:
    """A request validation error as a message and the parameter it is about, from its location and pydantic's
    message only: its input, context and URL would echo the request or name the server's code."""
    location = [str(part) for part in error.get("loc", ())[1:]]  # without "body"
    if error.get("type") == "json_invalid":  # located by the character where decoding failed
        problem = str(error.get("ctx", {}).get("error", "decode error")).removesuffix(" at")
        return f"The request body is not valid JSON: {problem} at character {location[0] if location else 0}.", None
    if not location:
        return "The request body must be a JSON object (Content-Type: application/json).", None
    where = ".".join(location)
    return f"{where}: {error.get('msg', 'invalid value')}", where

"""A tiny MCP server for the tests, on the official Python SDK (`mcp` from
PyPI, installed by the Rust test helper into target/mcp-py).

    server.py stdio          MCP over stdin/stdout
    server.py http           streamable HTTP on 127.0.0.1 (a free port,
                             printed as `PORT <n>` on stdout); every request
                             must carry `Authorization: Bearer $MCP_TEST_TOKEN`
                             (from the environment: a secret is never on
                             argv, which the tests check) and, if
                             MCP_TEST_HEADER is set, `X-Test-Header: <it>`
                             (else 401)

Tools: echo(text), add(a, b), env(name), fail(message), sleep(seconds),
crash().
"""

import os
import socket
import sys

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("test-srv")


@server.tool()
def echo(text: str) -> str:
    """Returns the text, prefixed with `echo:`."""
    return f"echo:{text}"


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def env(name: str) -> str:
    """The value of an environment variable of the server ('' if unset)."""
    return os.environ.get(name, "")


@server.tool()
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(message)


@server.tool()
async def sleep(seconds: float) -> str:
    """Sleeps, then says so."""
    await anyio.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Exits the server process at once."""
    os._exit(3)


def http(token: str) -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    header = os.environ.get("MCP_TEST_HEADER")
    app = server.streamable_http_app(
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            ok = headers.get("authorization") == f"Bearer {token}"
            if header is not None and headers.get("x-test-header") != header:
                ok = False
            if not ok:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"bad credentials"})
                return
        await app(scope, receive, send)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(guarded, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        http(os.environ["MCP_TEST_TOKEN"])
    else:
        server.run()

"""`client_routes()`: the browser client and its declarations, served as the package ships them."""

from __future__ import annotations

from importlib import resources

import httpx2
import pytest
from served import serving
from starlette.applications import Starlette

from streamscope.serve import client_routes


def test_the_client_and_its_types_are_served_and_revalidated() -> None:
    files = resources.files("streamscope.serve")
    with serving(Starlette(routes=client_routes("/assets/ss.js"))) as url, httpx2.Client(timeout=10) as client:
        module = client.get(url + "/assets/ss.js")
        assert module.status_code == 200 and module.headers["content-type"].startswith("text/javascript")
        assert module.content == files.joinpath("client.js").read_bytes()
        assert module.headers["x-typescript-types"] == "/assets/ss.d.ts"
        types = client.get(url + "/assets/ss.d.ts")
        assert types.status_code == 200 and types.content == files.joinpath("client.d.ts").read_bytes()
        again = client.get(url + "/assets/ss.js", headers={"If-None-Match": module.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        assert client.get(url + "/streamscope/client.js").status_code == 404, "served where it was asked to be"


@pytest.mark.parametrize(("path", "error", "said"), [
    ("streamscope.js", ValueError, "client_routes(path=...) takes a URL path that starts with / and ends with .js"),
    ("/streamscope/client", ValueError, "client_routes(path=...) takes a URL path that starts with / and ends"),
    (7, TypeError, "client_routes(path=...) takes a URL path (a str), such as '/streamscope/client.js', not int"),
])
def test_a_wrong_path_is_one_line(path: object, error: type[Exception], said: str) -> None:
    with pytest.raises(error) as raised:
        client_routes(path)  # type: ignore[arg-type]
    assert str(raised.value).startswith(said) and "\n" not in str(raised.value)

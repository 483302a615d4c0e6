"""``recontext serve``: an OpenAI-compatible HTTP server over one :class:`~recontext_engine.ReContextEngine`.

Needs the ``serve`` extra (FastAPI, uvicorn). Importing this package imports neither: the CLI hook
(:mod:`.cli`) loads them when the command runs. ``create_app`` is in :mod:`.app`.

- :mod:`.schemas`: request bodies (pydantic) and their parsing from raw bytes.
- :mod:`.calls`: what engine call a request becomes (documents, the messages rule, per-request options).
- :mod:`.worker`: the synchronous engine in worker threads, with cancellation.
- :mod:`.responses`: OpenAI response, chunk and usage objects.
- :mod:`.errors`: OpenAI error objects, the handlers that send them, and the one-log 500 middleware.
- :mod:`.guards`: Host/Origin allow-lists (DNS rebinding, cross-site posts) and the JSON content type.
- :mod:`.limits`: the body cap (413) and the body-read timeout (408).
- :mod:`.protocol`: uvicorn's h11 protocol with a request-head deadline and JSON errors for bad HTTP.
- :mod:`.openapi`: the request bodies and error object in ``/openapi.json``.
- :mod:`.app`: the routes. :mod:`.cli`: the ``serve`` subcommand.
- :mod:`.process`: ``recontext serve`` as a child process on a free loopback port (tests, recipes, load runs).
"""

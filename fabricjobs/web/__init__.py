"""The HTTP API (``fabricjobs web``): the command language's service over JSON, with tokens.

app.py (the application and what requests share), auth.py (roles and what each request
needs), tokens.py (the tokens file), errors.py (errors as JSON), schemas.py (the JSON shapes,
from the service's columns), routes/ (one module per kind of resource), server.py (uvicorn).
Dependencies point inward: this package uses the service and the store; nothing there knows
of it. Importing this package imports no web framework (the CLI's ``token`` commands use
tokens.py alone).
"""

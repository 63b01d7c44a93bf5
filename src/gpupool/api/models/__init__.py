"""The shapes the REST API answers with: pydantic models whose JSON names are camelCase
(``control.wire``), declared as each route's ``response_model`` so that ``/openapi.json``
states them and the schema-driven fuzz test holds the server to them.

Every model allows fields beyond those declared (they pass through unchanged), so that an
additive field reaches clients before its model is extended; the declared ones are checked.
"""

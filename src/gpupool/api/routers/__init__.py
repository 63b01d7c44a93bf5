"""One router per resource; :func:`gpupool.api.app.create_app` includes them all."""

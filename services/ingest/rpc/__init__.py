"""The gRPC face: build and run the server (TLS, health, reflection) and serve the RPCs."""

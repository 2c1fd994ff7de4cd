"""Web environments: small real sites on a local HTTP server, and a browser environment that acts on them."""

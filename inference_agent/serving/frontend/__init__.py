"""The serving API tenants call on ``--serve-port`` (CONTRACT section 11): who a request comes from, whether its
tenant's quota admits it, which pool and replica take it, and the request bodies' schema and byte bounds."""

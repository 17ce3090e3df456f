"""Pure domain rules: no ORM, no SQL, no asyncio: records, options, routing, capacity, closures, backoff."""

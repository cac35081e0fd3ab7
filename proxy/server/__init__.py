"""Server: the aiohttp application, its endpoints, and what requests share."""

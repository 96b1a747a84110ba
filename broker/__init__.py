"""The broker: storage (files, no network) below, server and background tasks (trio) above."""

"""`vram serve`: the machine seen from outside. service.py samples through one collector and
builds each answer once per reading; metrics.py names what Prometheus scrapes; http.py serves
it with bounded concurrency; web/ is the read-only page."""

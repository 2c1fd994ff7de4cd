"""Distribution on Ray: rollout workers as actors. ``ray`` is imported only here, lazily, so the CPU path
neither installs nor imports it."""

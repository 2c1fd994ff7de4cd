"""Run outputs: metric sinks, the live progress display and the HTML report."""

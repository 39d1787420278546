"""instrumentation/collector"""

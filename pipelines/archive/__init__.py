"""pipelines/archive"""

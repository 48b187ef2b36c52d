"""Queries: the read side every transport asks through.

A run's admission, assessed once per run version (`assessment_cache`), watched until final
(`run_signals` wakes one run's watchers), and pages of runs (`run_queries`); served as the JSON
API (`json_api`) and as pages for a browser (`page_routes`, rendered by `pages`, signed in to
by `sign_in`).
"""

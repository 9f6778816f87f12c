"""Providers: fleet-wide budgets and circuits per external service, and the backoff every retry
uses."""

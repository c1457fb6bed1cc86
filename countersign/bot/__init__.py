"""What Slack sends us: the Bolt listeners, payload reading, modals, the guard, and the HTTP
and Socket Mode adapters."""

"""The domain: intake, policy, review, cards and every Slack write, timeouts, the outbox relay
and the router worker."""

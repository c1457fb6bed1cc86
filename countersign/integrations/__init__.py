"""Drop-in approval for agent frameworks, each in a module of its own that the core never imports.

- `decorator`: `@requires_approval` for code without a framework (no extra package);
- `langgraph`: a tool call gated by countersign inside a LangGraph graph (`pip install
  'countersign[langgraph]'`);
- `langchain_agents`: the same as LangChain `create_agent` middleware (`countersign[langchain]`);
- `openai_agents`: tools with `needs_approval` decided by countersign, the paused run kept with the
  request (`pip install 'countersign[openai-agents]'`).
"""

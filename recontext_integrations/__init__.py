"""Framework adapters over the ReContext engine (LangChain, LlamaIndex); each needs its extra installed."""

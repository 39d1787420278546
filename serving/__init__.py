"""vLLM serving with A/B arms, logprobs and hot swap. Built in issue 4; see DESIGN.md §5–§7."""

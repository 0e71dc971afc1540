"""Tool calls as text: the plain format environments read (``text``), the model families' call
formats (``formats``: Hermes, Llama, Mistral, ...) and their parsing and rendering (``calls``).

A leaf unit: it imports nothing of agentjax but ``choice``, so the policy's chat codec, the
environments and the task suites can all use it.
"""

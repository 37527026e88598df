"""The bundled model's chat template (Qwen/ChatML style) and special tokens.

The rendered layout, which the trainer and the server's parsers rely on:

    <|im_start|>system\n{system}\n\n<tools>\n{tool json}\n...</tools><|im_end|>\n
    <|im_start|>user\n{text}<|im_end|>\n
    <|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{text}
        <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call><|im_end|>\n
    <|im_start|>user\n<tool_response>\n{output}\n</tool_response><|im_end|>\n
"""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Text-like markers: single tokens, but decoded as text (as in Qwen's tokenizers).
MARKER_TOKENS = (
    "<think>", "</think>", "<tool_call>", "</tool_call>",
    "<tools>", "</tools>", "<tool_response>", "</tool_response>",
)

CHAT_TEMPLATE = (
    "{%- macro text(c) -%}"
    "{%- if c is string -%}{{ c }}"
    "{%- elif c -%}{%- for p in c -%}{{ p.text if p.text is defined else '' }}{%- endfor -%}"
    "{%- endif -%}"
    "{%- endmacro -%}"
    "{%- macro args(a) -%}{%- if a is string -%}{{ a }}{%- else -%}{{ a | tojson }}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set ns = namespace(first=0) -%}"
    "{%- if tools -%}"
    "{{ '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role in ['system', 'developer'] -%}"
    "{{ text(messages[0].content) + '\\n\\n' }}{%- set ns.first = 1 -%}"
    "{%- endif -%}"
    "{{ '<tools>\\n' }}"
    "{%- for tool in tools -%}"
    "{{ (tool.function if tool.function is defined else tool) | tojson }}{{ '\\n' }}"
    "{%- endfor -%}"
    "{{ '</tools><|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages[ns.first:] -%}"
    "{%- if message.role == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if message.reasoning_content -%}"
    "{{ '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}"
    "{%- endif -%}"
    "{%- set content = text(message.content) -%}"
    "{{ content }}"
    "{%- for tc in (message.tool_calls or []) -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "{%- if content or not loop.first -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<tool_call>\\n{\"name\": ' }}{{ f.name | tojson }}"
    "{{ ', \"arguments\": ' }}{{ args(f.arguments) }}{{ '}\\n</tool_call>' }}"
    "{%- endfor -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{ '<|im_start|>user\\n' }}"
    "{%- else -%}{{ '\\n' }}{%- endif -%}"
    "{{ '<tool_response>\\n' + text(message.content) + '\\n</tool_response>' }}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{ '<|im_end|>\\n' }}{%- endif -%}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message.role + '\\n' + text(message.content) + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

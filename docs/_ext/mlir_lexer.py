"""A Pygments lexer for the MLIR text format, enough to colour the dtensor
and rank dialect examples of these pages (Pygments ships none)."""
from pygments.lexer import RegexLexer, bygroups
from pygments.token import (Comment, Keyword, Name, Number, Operator, Punctuation, String,
                            Text, Whitespace)


class MlirLexer(RegexLexer):
    name = "MLIR"
    aliases = ["mlir"]
    filenames = ["*.mlir"]

    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r'"(\\\\|\\"|[^"])*"', String.Double),
            # SSA values (%0, %arg1, %x#2), symbols (@main), block labels (^bb0)
            (r"%[A-Za-z0-9_.$#-]+", Name.Variable),
            (r"@[A-Za-z0-9_.$-]+", Name.Function),
            (r"\^[A-Za-z0-9_.$-]+", Name.Label),
            # attribute aliases and dialect types (#mesh, !dtensor.tensor)
            (r"#[A-Za-z0-9_.$-]+", Name.Constant),
            (r"![A-Za-z0-9_.$-]+", Keyword.Type),
            # shapes such as 7x5xf32 before the plain numbers
            (r"(\d+x)+(f16|bf16|f32|f64|i1|i8|i16|i32|i64|index)\b", Keyword.Type),
            (r"\b(f16|bf16|f32|f64|i1|i8|i16|i32|i64|index|tensor|memref)\b", Keyword.Type),
            (r"[-+]?\d+\.\d*([eE][-+]?\d+)?", Number.Float),
            (r"0x[0-9A-Fa-f]+", Number.Hex),
            (r"[-+]?\d+", Number.Integer),
            # operation names: dialect.op
            (r"([A-Za-z_][A-Za-z0-9_$]*)(\.)([A-Za-z_][A-Za-z0-9_.$]*)",
             bygroups(Name.Namespace, Punctuation, Name.Builtin)),
            (r"\b(module|func|return|attributes|to|on|axis|dims|seed|distribution)\b",
             Keyword),
            (r"[A-Za-z_][A-Za-z0-9_$]*", Name),
            (r"->|=|:|\*", Operator),
            (r"[()\[\]{}<>,.?]", Punctuation),
            (r".", Text),
        ],
    }

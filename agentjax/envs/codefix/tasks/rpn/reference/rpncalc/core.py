def evaluate(expr):
    """Evaluates a space-separated reverse Polish expression of integers and + - * /."""
    stack = []
    for tok in expr.split():
        if tok in "+-*/":
            a = stack.pop()
            b = stack.pop()
            if tok == "+":
                stack.append(b + a)
            elif tok == "-":
                stack.append(b - a)
            elif tok == "*":
                stack.append(b * a)
            else:
                stack.append(a / b)
        else:
            stack.append(int(tok))
    return stack[-1]


def tokens(expr):
    """Number of tokens in an expression."""
    return len(expr.split())

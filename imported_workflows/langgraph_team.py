"""A LangGraph StateGraph someone built for data analysis: explore, plan, write code, run it and
loop back on failure, then report. Trellis imports it through langgraph's own API (the graph is
loaded in the sandbox and read with get_graph()), grounds each node in a Trellis role and runs it:
  python manage.py evolve examples/soil-respiration-sites --start imported_workflows/langgraph_team.py:graph
"""
from typing import TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    notes: str
    code: str
    ok: bool


def explore_data(state: State) -> State:
    """Profile the data files: columns, ranges, missing values, how the target relates to them."""
    return {"notes": "profiled"}


def choose_method(state: State) -> State:
    """Choose a modelling approach from the profile."""
    return {"notes": state.get("notes", "") + "; planned"}


def write_code(state: State) -> State:
    """Write the program that fits the model and writes the predictions."""
    return {"code": "print('fit')"}


def run_tests(state: State) -> State:
    """Run the program and check its predictions file."""
    return {"ok": True}


def write_report(state: State) -> State:
    """Summarise the approach, the validation score and the risks."""
    return {}


def after_tests(state: State) -> str:
    return "write_report" if state.get("ok") else "write_code"


builder = StateGraph(State)
for fn in (explore_data, choose_method, write_code, run_tests, write_report):
    builder.add_node(fn.__name__, fn)
builder.add_edge(START, "explore_data")
builder.add_edge("explore_data", "choose_method")
builder.add_edge("choose_method", "write_code")
builder.add_edge("write_code", "run_tests")
builder.add_conditional_edges("run_tests", after_tests, ["write_code", "write_report"])
builder.add_edge("write_report", END)
graph = builder.compile()

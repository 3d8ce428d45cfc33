"""An AFlow workflow as AFlow's optimizer writes it (graph.py of a round): operators made in
__init__, awaited in __call__. Trellis reads this as a syntax tree and never runs it:
  python manage.py evolve examples/diabetes-progression --start imported_workflows/aflow_graph.py
"""
from typing import Literal

import workspace.template.operator as operator
import workspace.round_3.prompt as prompt_custom
from metagpt.provider.llm_provider_registry import create_llm_instance

DatasetType = Literal["HumanEval", "MBPP", "MATH", "GSM8K"]


class Workflow:
    def __init__(self, name: str, llm_config, dataset: DatasetType) -> None:
        self.name = name
        self.dataset = dataset
        self.llm = create_llm_instance(llm_config)
        self.custom = operator.Custom(self.llm)
        self.programmer = operator.Programmer(self.llm)
        self.test = operator.Test(self.llm)
        self.sc_ensemble = operator.ScEnsemble(self.llm)

    async def __call__(self, problem: str):
        analysis = await self.custom(input=problem, instruction=prompt_custom.ANALYSE_PROMPT)
        solutions = []
        for _ in range(3):
            code = await self.programmer(problem=problem, analysis=analysis["response"])
            checked = await self.test(problem=problem, solution=code["code"])
            solutions.append(checked["solution"])
        final = await self.sc_ensemble(solutions=solutions, problem=problem)
        return final["response"], self.llm.cost_manager.total_cost

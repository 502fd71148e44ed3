"""Make the SAGE authors' evaluation script write an ``evaluation_results.json`` for a toy evaluation:
``python make_file.py AUTHORS_CHECKOUT OUT_FILE`` (README.md beside this file says which checkout and
environment).

Their ``quick_eval`` (sampling, grading with math-verify, pass_at_1, pass_at_k) and ``save_results`` (the
file's layout and aggregates) run unchanged; the model and tokenizer are stand-ins without weights that
answer each sample right or wrong as :data:`OUTCOMES` says, so the file's ``is_correct`` is known.
"""

import sys

import torch

sys.path.insert(0, sys.argv[1])
from src.eval.eval_model import quick_eval, save_results  # noqa: E402

K = 4
PROBLEMS = {
    "MATH-500": [("1+6", "7"), ("2*9", "18"), ("30-4", "26"), ("5*5", "25"), ("11+12", "23")],
    "AMC23": [("3*7", "21"), ("8+9", "17"), ("40/2", "20")],
}
# algo_type -> dataset -> seed -> per problem, the k samples' outcomes (1: right answer)
OUTCOMES = {
    "grpo": {
        "MATH-500": {
            0: [[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 0]],
            1: [[1, 1, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]],
        },
        "AMC23": {
            0: [[0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]],
            1: [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]],
        },
    },
    "sage": {
        "MATH-500": {
            0: [[1, 1, 1, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 1, 0], [0, 0, 0, 0]],
            1: [[1, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 0, 1], [0, 0, 0, 1]],
        },
        "AMC23": {
            0: [[0, 1, 0, 0], [1, 0, 1, 0], [1, 1, 1, 1]],
            1: [[0, 0, 0, 0], [0, 1, 1, 0], [1, 1, 0, 1]],
        },
    },
}


class StandInTokenizer:
    """Encodes a prompt as one token; decodes token 1 as the right answer, token 2 as a wrong one."""

    pad_token_id = 0
    eos_token_id = 0

    def __init__(self):
        self.answer = None

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return messages[-1]["content"]

    def __call__(self, text, return_tensors="pt"):
        self.answer = next(a for problems in PROBLEMS.values() for q, a in problems if q in text)
        return {"input_ids": torch.zeros((1, 1), dtype=torch.long)}

    def batch_decode(self, ids, skip_special_tokens=True):
        wrong = str(int(self.answer) + 1)
        return [
            f"So the answer is $\\boxed{{{self.answer if int(row[-1]) == 1 else wrong}}}$." for row in ids
        ]


class StandInModel:
    """Draws the outcomes of OUTCOMES[algo][dataset][seed] for the problem being evaluated, in order."""

    def __init__(self):
        self.rows = None
        self.problem = 0
        self.drawn = 0

    def parameters(self):
        yield torch.zeros(1)

    def start(self, rows):
        self.rows, self.problem, self.drawn = rows, 0, 0

    def generate(self, input_ids, num_return_sequences, **kwargs):
        row = self.rows[self.problem]
        out = row[self.drawn : self.drawn + num_return_sequences]
        self.drawn += num_return_sequences
        if self.drawn == len(row):
            self.problem, self.drawn = self.problem + 1, 0
        return torch.tensor([[0, 1 if o else 2] for o in out])


cfg = {"k": K, "generation_batch_size": 2, "temperature": 0.3, "top_p": 0.95, "max_new_tokens": 16}
model, tokenizer = StandInModel(), StandInTokenizer()
records = []
for algo, by_dataset in OUTCOMES.items():
    for dataset, by_seed in by_dataset.items():
        items = [
            {"prompt": [{"role": "user", "content": f"Problem: {q}"}], "answer": a}
            for q, a in PROBLEMS[dataset]
        ]
        for seed, rows in by_seed.items():
            model.start(rows)
            p1, pk, is_correct = quick_eval(model, tokenizer, cfg, items, seed)
            assert is_correct == rows, (algo, dataset, seed, is_correct)
            records.append(
                {
                    "dataset": dataset,
                    "algo_type": algo,
                    "ckpt": "checkpoint-200",
                    "step": 200,
                    "seed": seed,
                    "pass_at_1": float(p1),
                    "pass_at_k": float(pk),
                    "is_correct": is_correct,
                }
            )
save_results(sys.argv[2], K, records)

"""A lighteval custom model without weights: for a problem it writes its doc's ``num_samples`` completions, the
first CORRECT[question] of them with the right answer in a box, the others with a wrong one."""

from lighteval.models.abstract_model import LightevalModel
from lighteval.models.model_output import ModelResponse
from lighteval.utils.cache_management import SampleCache

CORRECT = {
    "What is 1+1?": 0,
    "What is 2+3?": 1,
    "What is 7*6?": 3,
    "What is 10-4?": 8,
    "What is 9+9?": 2,
    "What is 3*3?": 5,
    "What is 4+4?": 0,
    "What is 5*5?": 2,
    "What is 12-5?": 6,
    "What is 6+7?": 4,
}


class ToyModel(LightevalModel):
    def __init__(self, config):
        self.config = config
        self._cache = SampleCache(config)

    @property
    def tokenizer(self):
        return None

    @property
    def add_special_tokens(self):
        return False

    @property
    def max_length(self):
        return 2048

    def greedy_until(self, docs):
        out = []
        for doc in docs:
            gold = doc.get_golds()[0]
            correct = CORRECT[doc.query]
            wrong = str(int(gold) + 1)
            texts = [
                f"The answer is $\\boxed{{{gold if j < correct else wrong}}}$."
                for j in range(doc.num_samples)
            ]
            out.append(ModelResponse(text=texts))
        return out

    def loglikelihood(self, docs):
        raise NotImplementedError

    def loglikelihood_rolling(self, docs):
        raise NotImplementedError

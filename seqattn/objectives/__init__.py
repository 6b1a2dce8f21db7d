"""Lightning objectives. Each knows a kind of label, never a modality."""

from seqattn.objectives.base import Objective
from seqattn.objectives.ctc import CTCRecognition
from seqattn.objectives.labeling import IGNORE_INDEX, SequenceClassification, SequenceLabeling
from seqattn.objectives.masked import MaskedModelling
from seqattn.objectives.property import PropertyPrediction
from seqattn.objectives.schedules import warmup_cosine

__all__ = ["CTCRecognition", "IGNORE_INDEX", "MaskedModelling", "Objective", "PropertyPrediction", "SequenceClassification", "SequenceLabeling", "warmup_cosine"]

"""A plain namespace for the functions one kernel module compiles."""


class Namespace:
    def __init__(self, **functions: object) -> None:
        self.__dict__.update(functions)

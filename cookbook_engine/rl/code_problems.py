"""A built-in set of small Python function problems for RL on code, written by this project (no download).

Forty problems of graded difficulty, from `square(x)` to `merge_sorted(a, b)`, small enough that a 135M chat
model sometimes solves them, so rewards vary within a group and GRPO has a signal. Each problem asks for one
function in a ```python fenced block and carries 3-5 assert tests; a response is graded by running its code
block with the tests in the sandbox (`grade_response`, reward = fraction of tests passed).

What it is not: a benchmark (the problems are easy and few) or the RL environment itself (rl/envs.py turns
problems into prompts and groups). The reference solutions live in tests/test_graders.py, which checks every
problem's tests pass with them, and fail with a function that returns None.
"""

from __future__ import annotations

from dataclasses import dataclass

from cookbook_engine.rl.code_grading import plan_snippets
from cookbook_engine.rl.graders import Grade, grade_code_response

PROMPT_TEMPLATE = "Write a Python function `{signature}` that {task}. Put the function in a ```python code block."


@dataclass
class CodeProblem:
    name: str
    prompt: str
    function_name: str
    tests: list[str]


def _problem(signature: str, task: str, tests: list[str]) -> CodeProblem:
    function_name = signature.split("(")[0]
    return CodeProblem(
        name=function_name,
        prompt=PROMPT_TEMPLATE.format(signature=signature, task=task),
        function_name=function_name,
        tests=tests,
    )


CODE_PROBLEMS: list[CodeProblem] = [
    # One-liners on numbers.
    _problem(
        "square(x)",
        "returns x multiplied by itself",
        ["assert square(3) == 9", "assert square(0) == 0", "assert square(-4) == 16", "assert square(1.5) == 2.25"],
    ),
    _problem(
        "add(a, b)",
        "returns the sum of a and b",
        ["assert add(2, 3) == 5", "assert add(-1, 1) == 0", "assert add(0, 0) == 0", "assert add(10, -25) == -15"],
    ),
    _problem(
        "double(x)",
        "returns twice the number x",
        ["assert double(4) == 8", "assert double(0) == 0", "assert double(-3) == -6"],
    ),
    _problem(
        "negate(x)",
        "returns the number x with its sign flipped",
        ["assert negate(5) == -5", "assert negate(-2) == 2", "assert negate(0) == 0"],
    ),
    _problem(
        "is_even(n)",
        "returns True if the integer n is even and False otherwise",
        [
            "assert is_even(4) is True",
            "assert is_even(7) is False",
            "assert is_even(0) is True",
            "assert is_even(-3) is False",
        ],
    ),
    _problem(
        "absolute_value(x)",
        "returns the absolute value of x without using abs()",
        ["assert absolute_value(-7) == 7", "assert absolute_value(3) == 3", "assert absolute_value(0) == 0"],
    ),
    _problem(
        "max_of_three(a, b, c)",
        "returns the largest of the three numbers",
        [
            "assert max_of_three(1, 2, 3) == 3",
            "assert max_of_three(9, 2, 5) == 9",
            "assert max_of_three(-1, -5, -2) == -1",
            "assert max_of_three(4, 4, 1) == 4",
        ],
    ),
    _problem(
        "celsius_to_fahrenheit(c)",
        "converts a temperature from Celsius to Fahrenheit",
        [
            "assert celsius_to_fahrenheit(0) == 32",
            "assert celsius_to_fahrenheit(100) == 212",
            "assert celsius_to_fahrenheit(-40) == -40",
            "assert abs(celsius_to_fahrenheit(37) - 98.6) < 1e-9",
        ],
    ),
    # Lists and strings, one step.
    _problem(
        "first_element(xs)",
        "returns the first element of the list xs",
        [
            "assert first_element([3, 1, 2]) == 3",
            "assert first_element(['a']) == 'a'",
            "assert first_element([None, 1]) is None",
        ],
    ),
    _problem(
        "last_element(xs)",
        "returns the last element of the list xs",
        [
            "assert last_element([3, 1, 2]) == 2",
            "assert last_element(['a']) == 'a'",
            "assert last_element([1, None]) is None",
        ],
    ),
    _problem(
        "max_of_list(xs)",
        "returns the largest number in the non-empty list xs",
        [
            "assert max_of_list([1, 5, 3]) == 5",
            "assert max_of_list([-2, -8]) == -2",
            "assert max_of_list([7]) == 7",
            "assert max_of_list([2, 9, 9, 1]) == 9",
        ],
    ),
    _problem(
        "min_of_list(xs)",
        "returns the smallest number in the non-empty list xs",
        ["assert min_of_list([4, 2, 8]) == 2", "assert min_of_list([-1, -6]) == -6", "assert min_of_list([0]) == 0"],
    ),
    _problem(
        "sum_list(xs)",
        "returns the sum of the numbers in the list xs (0 for an empty list)",
        ["assert sum_list([1, 2, 3]) == 6", "assert sum_list([]) == 0", "assert sum_list([-5, 5, 10]) == 10"],
    ),
    _problem(
        "reverse_string(s)",
        "returns the string s reversed",
        [
            "assert reverse_string('hello') == 'olleh'",
            "assert reverse_string('') == ''",
            "assert reverse_string('ab c') == 'c ba'",
        ],
    ),
    _problem(
        "to_upper(s)",
        "returns the string s in upper case",
        ["assert to_upper('hello') == 'HELLO'", "assert to_upper('MiXeD 1') == 'MIXED 1'", "assert to_upper('') == ''"],
    ),
    # Loops and conditions.
    _problem(
        "average(xs)",
        "returns the arithmetic mean of the non-empty list of numbers xs",
        [
            "assert average([1, 2, 3]) == 2",
            "assert average([5]) == 5",
            "assert average([1, 2]) == 1.5",
            "assert average([-3, 3, 6]) == 2",
        ],
    ),
    _problem(
        "count_vowels(s)",
        "returns how many vowels (a, e, i, o, u, upper or lower case) the string s contains",
        [
            "assert count_vowels('hello') == 2",
            "assert count_vowels('sky') == 0",
            "assert count_vowels('AEIOU') == 5",
            "assert count_vowels('Programming') == 3",
        ],
    ),
    _problem(
        "count_uppercase(s)",
        "returns how many upper-case letters the string s contains",
        [
            "assert count_uppercase('Hello World') == 2",
            "assert count_uppercase('abc') == 0",
            "assert count_uppercase('ABC def G') == 4",
        ],
    ),
    _problem(
        "factorial(n)",
        "returns n! for a non-negative integer n (factorial(0) is 1)",
        [
            "assert factorial(0) == 1",
            "assert factorial(1) == 1",
            "assert factorial(5) == 120",
            "assert factorial(10) == 3628800",
        ],
    ),
    _problem(
        "multiply_list(xs)",
        "returns the product of the numbers in the list xs (1 for an empty list)",
        [
            "assert multiply_list([2, 3, 4]) == 24",
            "assert multiply_list([]) == 1",
            "assert multiply_list([5, -1]) == -5",
            "assert multiply_list([7, 0, 3]) == 0",
        ],
    ),
    _problem(
        "count_occurrences(xs, x)",
        "returns how many times x appears in the list xs",
        [
            "assert count_occurrences([1, 2, 1, 3], 1) == 2",
            "assert count_occurrences([], 5) == 0",
            "assert count_occurrences(['a', 'b'], 'c') == 0",
            "assert count_occurrences([4, 4, 4], 4) == 3",
        ],
    ),
    _problem(
        "is_palindrome(s)",
        "returns True if the string s reads the same forwards and backwards",
        [
            "assert is_palindrome('racecar') is True",
            "assert is_palindrome('hello') is False",
            "assert is_palindrome('') is True",
            "assert is_palindrome('abba') is True",
        ],
    ),
    _problem(
        "is_leap_year(year)",
        "returns True if year is a leap year in the Gregorian calendar",
        [
            "assert is_leap_year(2024) is True",
            "assert is_leap_year(2023) is False",
            "assert is_leap_year(1900) is False",
            "assert is_leap_year(2000) is True",
        ],
    ),
    _problem(
        "fizzbuzz(n)",
        "returns 'FizzBuzz' if n is divisible by 15, 'Fizz' if by 3, 'Buzz' if by 5, and otherwise n as a string",
        [
            "assert fizzbuzz(3) == 'Fizz'",
            "assert fizzbuzz(10) == 'Buzz'",
            "assert fizzbuzz(30) == 'FizzBuzz'",
            "assert fizzbuzz(7) == '7'",
            "assert fizzbuzz(1) == '1'",
        ],
    ),
    _problem(
        "sum_of_digits(n)",
        "returns the sum of the decimal digits of the non-negative integer n",
        [
            "assert sum_of_digits(123) == 6",
            "assert sum_of_digits(0) == 0",
            "assert sum_of_digits(9999) == 36",
            "assert sum_of_digits(505) == 10",
        ],
    ),
    _problem(
        "count_words(s)",
        "returns the number of words in the string s, where words are separated by whitespace",
        [
            "assert count_words('hello world') == 2",
            "assert count_words('') == 0",
            "assert count_words('  one   two three ') == 3",
        ],
    ),
    _problem(
        "power(base, exponent)",
        "returns base raised to the non-negative integer exponent",
        [
            "assert power(2, 10) == 1024",
            "assert power(5, 0) == 1",
            "assert power(-3, 3) == -27",
            "assert power(7, 1) == 7",
        ],
    ),
    # A little algorithm.
    _problem(
        "fibonacci(n)",
        "returns the n-th Fibonacci number, where fibonacci(0) is 0 and fibonacci(1) is 1",
        [
            "assert fibonacci(0) == 0",
            "assert fibonacci(1) == 1",
            "assert fibonacci(2) == 1",
            "assert fibonacci(10) == 55",
            "assert fibonacci(20) == 6765",
        ],
    ),
    _problem(
        "is_prime(n)",
        "returns True if the integer n is a prime number",
        [
            "assert is_prime(2) is True",
            "assert is_prime(17) is True",
            "assert is_prime(1) is False",
            "assert is_prime(21) is False",
            "assert is_prime(97) is True",
        ],
    ),
    _problem(
        "gcd(a, b)",
        "returns the greatest common divisor of the positive integers a and b",
        ["assert gcd(12, 18) == 6", "assert gcd(7, 13) == 1", "assert gcd(100, 25) == 25", "assert gcd(9, 9) == 9"],
    ),
    _problem(
        "remove_duplicates(xs)",
        "returns a new list with the duplicates of xs removed, keeping first occurrences in their original order",
        [
            "assert remove_duplicates([1, 2, 1, 3, 2]) == [1, 2, 3]",
            "assert remove_duplicates([]) == []",
            "assert remove_duplicates(['b', 'a', 'b']) == ['b', 'a']",
        ],
    ),
    _problem(
        "sort_list(xs)",
        "returns a new list with the numbers of xs in ascending order",
        [
            "assert sort_list([3, 1, 2]) == [1, 2, 3]",
            "assert sort_list([]) == []",
            "assert sort_list([5, -1, 5, 0]) == [-1, 0, 5, 5]",
        ],
    ),
    _problem(
        "capitalize_words(s)",
        "returns s with the first letter of every space-separated word in upper case "
        "and the rest of each word unchanged",
        [
            "assert capitalize_words('hello world') == 'Hello World'",
            "assert capitalize_words('a') == 'A'",
            "assert capitalize_words('python is fun') == 'Python Is Fun'",
        ],
    ),
    _problem(
        "longest_word(s)",
        "returns the longest word in the string s (the first one if several are equally long)",
        [
            "assert longest_word('the quick brown fox') == 'quick'",
            "assert longest_word('a bb cc') == 'bb'",
            "assert longest_word('hello') == 'hello'",
        ],
    ),
    _problem(
        "running_sum(xs)",
        "returns the list of running totals of xs, e.g. [1, 2, 3] gives [1, 3, 6]",
        [
            "assert running_sum([1, 2, 3]) == [1, 3, 6]",
            "assert running_sum([]) == []",
            "assert running_sum([5, -5, 2]) == [5, 0, 2]",
        ],
    ),
    _problem(
        "flatten(lists)",
        "returns one list with the elements of the given list of lists, in order",
        [
            "assert flatten([[1, 2], [3], []]) == [1, 2, 3]",
            "assert flatten([]) == []",
            "assert flatten([['a'], ['b', 'c']]) == ['a', 'b', 'c']",
        ],
    ),
    _problem(
        "char_frequency(s)",
        "returns a dict mapping each character of the string s to how many times it appears",
        [
            "assert char_frequency('aab') == {'a': 2, 'b': 1}",
            "assert char_frequency('') == {}",
            "assert char_frequency('xyx') == {'x': 2, 'y': 1}",
        ],
    ),
    _problem(
        "is_anagram(a, b)",
        "returns True if the strings a and b contain the same letters the same number of times",
        [
            "assert is_anagram('listen', 'silent') is True",
            "assert is_anagram('abc', 'abd') is False",
            "assert is_anagram('aab', 'ab') is False",
            "assert is_anagram('', '') is True",
        ],
    ),
    _problem(
        "second_largest(xs)",
        "returns the second largest distinct number in the list xs, which has at least two distinct numbers",
        [
            "assert second_largest([1, 3, 2]) == 2",
            "assert second_largest([5, 5, 4]) == 4",
            "assert second_largest([-1, -2, -3]) == -2",
            "assert second_largest([10, 10, 9, 9]) == 9",
        ],
    ),
    _problem(
        "merge_sorted(a, b)",
        "merges two ascending lists into one ascending list",
        [
            "assert merge_sorted([1, 3, 5], [2, 4]) == [1, 2, 3, 4, 5]",
            "assert merge_sorted([], [1]) == [1]",
            "assert merge_sorted([], []) == []",
            "assert merge_sorted([1, 1], [1]) == [1, 1, 1]",
        ],
    ),
]

# Every fifth problem (spread over the difficulty range) is held out for evaluation: 32 train, 8 test.
TEST_EVERY = 5


def train_test_split() -> tuple[list[CodeProblem], list[CodeProblem]]:
    """The fixed split: problems at positions 4, 9, 14, ... are the test set; the rest are the train set."""
    train = [problem for index, problem in enumerate(CODE_PROBLEMS) if index % TEST_EVERY != TEST_EVERY - 1]
    test = [problem for index, problem in enumerate(CODE_PROBLEMS) if index % TEST_EVERY == TEST_EVERY - 1]
    return train, test


def grade_response(problem: CodeProblem, response: str) -> Grade:
    """Grade a model's response to `problem`: run its ```python block with the problem's tests in the sandbox."""
    return grade_code_response(response, plan_snippets(problem.tests, [problem.function_name]))

"""The demo app (config/demo.yaml), tested with the flowbus pytest plugin:
pytest --flowbus-config config/demo.yaml clients/python/examples"""
import pytest
from flowbus import Dropped


def test_api_key_opens_the_dashboard(flowbus_topology):
    navigation = flowbus_topology.navigation()
    flowbus_topology.step("apikey", "apiKeyIsComplete")
    navigation.expect("MainFlow.apiKeyIsComplete", "WishlistFlow.movieList", "WatchedFlow.movieList")
    flowbus_topology.step("wishlist/movies", "moviePicked", withMovieId=23452)
    navigation.expect(("WishlistFlow.moviePicked", {"withMovieId": 23452}))


def test_a_hidden_tab_refuses_its_steps(flowbus_topology):
    navigation = flowbus_topology.navigation()
    flowbus_topology.step("apikey", "apiKeyIsComplete")
    navigation.expect("MainFlow.apiKeyIsComplete", "WishlistFlow.movieList", "WatchedFlow.movieList")
    with pytest.raises(Dropped, match="not-visible"):
        flowbus_topology.step("watched/movies", "moviePicked", withMovieId=7)
    navigation.expect_diagnostic("not-visible", stepper="watched/movies")


def test_the_counter_counts(flowbus_topology):
    counter = flowbus_topology.states("counter")
    flowbus_topology.action("counter", "increase")
    counter.expect(lambda s: s["isLoading"], {"isLoading": True, "value": 1}, {"isLoading": False, "value": 1})


def test_the_login_reactor_moves_the_app_on(flowbus_topology):
    navigation = flowbus_topology.navigation()
    flowbus_topology.action("login", "submit", apiKey="secret")
    navigation.expect("MainFlow.apiKeyIsComplete", "WishlistFlow.movieList", "WatchedFlow.movieList")
